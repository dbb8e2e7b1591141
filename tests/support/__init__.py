"""What several test modules share that is not a fixture: builders of lineages, tokenizer
variants and model folders, and the CLI's JSON runner. Fixtures live in the ``conftest.py``
files."""
