"""Programs run alone inside an MCP server's sandbox with `python -I -S`: `bridge` (the tool
user, and the proxy on loopback) and `launch` (what bwrap is handed). Standard library only;
never imported by brokerd, only bound into the sandbox and run."""
