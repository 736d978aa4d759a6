"""The training side's fixtures (a tiny random BERT, a tiny STS set) for every test under tests/models/."""

from tests.models.fixtures import tiny_bert  # noqa: F401 (a session fixture, registered here)
