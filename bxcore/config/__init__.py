"""`config.toml` (SPEC §2.2): the file read strictly into `Config` (`file`), its tables' keys
and their help (`keys`), and the `[[mcp]]` entries (`mcp`) and `[matrix]` table (`matrix`)."""
