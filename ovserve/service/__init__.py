"""Turns API requests into engine jobs and engine output into API responses."""
