"""brokerd's pure core (issue 11): argument checks, grants, the decision, labels seen by a
sandbox, approvals, ledger records and the chain check, and the call machine. No I/O, no
clock: a core module imports only the core, `bxcore` and the standard library
(`tests/unit/test_imports.py`).
"""
