"""loopd's pure core (issue 25): the turn machine (`turn`) and the values it is fed and asks for
(`turn_events`). No I/O, no clock: a core module imports only the core, `bxcore` and the
standard library (`tests/unit/test_imports.py`).
"""
