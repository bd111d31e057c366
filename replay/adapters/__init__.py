"""Example participant adapters: what a user's plug-in for ``--participant`` looks like."""
