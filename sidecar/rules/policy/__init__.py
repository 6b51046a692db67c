"""The policy on requests: `plan` decides whether a request is looked up and under which
keys (`keys`), and what its arguments make of that (`arguments`)."""
