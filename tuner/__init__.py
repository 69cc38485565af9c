"""ember.tuner."""
