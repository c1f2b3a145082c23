"""Test doubles that stand in for things outside boxmaker (a model server); never used by
production code."""
