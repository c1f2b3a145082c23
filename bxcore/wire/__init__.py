"""The wire (SPEC §3): every message as a frozen dataclass (`messages`, one module a socket:
`common`, `broker`, `admin`, `loop`, `supervisor`), read and written strictly by their
annotations (`schema`) as one frame of canonical JSON (`codec`); what each socket takes
(`sockets`), and how patiently each request is asked and what answers it (`asking`)."""
