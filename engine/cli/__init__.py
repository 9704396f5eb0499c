"""The `swarmscope` command line: one module per subcommand."""
