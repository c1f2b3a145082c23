"""Helpers shared by the test suites (not tests themselves)."""
