"""ember.tir."""
