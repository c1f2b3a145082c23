"""The MCP servers of `[[mcp]]` (SPEC §18): running them (`runner`), starting one (`start`) in
its sandbox (`sandbox`), its process and lines (`stdio`, `wire`), its egress (`proxy`) and what
the model reads of a result (`result`). `inside/` holds the programs that run alone inside
a server's sandbox, on the standard library only (`tests/unit/test_imports.py`)."""
