"""The audit ledger (SPEC §7, I1, I8): its file (`file`), the head brokerd confirmed (`head`),
reading it from any point (`scan`), opening it at start (`start`), the index of calls
(`index`), group commit (`commit`) and the fast whole check (`verify`)."""
