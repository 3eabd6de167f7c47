"""What a run leaves on disk: the record schema, the machine a record ran on, results.jsonl and
invocations.jsonl (JSON Lines that survive a crash or a full disk), and the --out folder with its
lock. No torch here: the parent process, the report and `sync` read records without loading a model."""
