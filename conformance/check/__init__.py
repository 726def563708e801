"""Checks: what runs on every rank of a world for a cell, and what it compares."""
