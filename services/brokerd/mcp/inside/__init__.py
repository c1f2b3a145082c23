"""The programs an MCP server's start runs alone, with `python -I -S` and nothing of the box's:
`launch`, just outside the sandbox (it starts bwrap, handing it the seccomp filter's
descriptor and writing the user namespace's map), and `bridge`, first inside it (the tool
user, and the proxy on loopback). Standard library only; never imported by brokerd, only run
(`bridge` bound into the sandbox)."""
