"""The program that runs inside each tool sandbox (SPEC §8.3); see `__main__`.

Kept empty: importing the package must cost nothing, and it must import alone as `toolkit`.
"""
