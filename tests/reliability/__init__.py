"""Fault, load and bad-input tests: the client, the worker and the reference server keep
working and lose nothing (see ``_ledger`` for the accounting every scenario ends with)."""
