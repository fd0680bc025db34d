"""Turns: the pure turn state machine and the driver that owns the cancel grace window."""
