"""Ember's version, in the base layer so any module may read it without the package root."""

__version__ = "0.1.0"
