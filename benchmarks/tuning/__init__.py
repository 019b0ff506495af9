"""Recipe searches on the private data, charged: ``bench tune`` (search.py), its public spaces (spaces.py) and the
private validation split its trials are scored on (validation.py). The accounting:
methods/accounting/repeat_select.py."""
