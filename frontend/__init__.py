"""ember.frontend."""
