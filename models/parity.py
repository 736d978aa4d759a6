"""The sentences an exported graph is checked on against torch (`models.export`) and that the int8
batch-invariance check adds to its texts (`models.quantize`): varied lengths on purpose, since padding inside a
batch is where exported graphs go wrong — one short, one long enough to be truncated."""

PARITY_SENTENCES = [
    "hi",
    "How do I learn Python quickly?",
    "What is the best way to invest ten thousand dollars in India right now, given the inflation rate?",
    "A man is playing a guitar.",
    " ".join(["Why is the sky blue and the sea green and the grass so much greener elsewhere?"] * 40),
    "Quelle est la capitale de la France ?",
    "12345 67890 !!! ??? ...",
]
