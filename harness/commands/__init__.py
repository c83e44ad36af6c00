"""The subcommands of ``ppconf``, by what they work on: the claims, a run, what runs wrote."""
