"""`config.toml` (SPEC §2.2): the file read strictly into `Config` (`file`), its tables' keys
and their help (`keys`), the `[[mcp]]` entries (`mcp`) and `[matrix]` table (`matrix`), and
what is written from the keys: the commented file `bxctl init` writes and the reference page
(`written`)."""
