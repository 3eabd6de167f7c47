"""Checks that explain what reduced precision did to a model."""
