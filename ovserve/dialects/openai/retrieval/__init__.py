"""Retrieval and tokenizer endpoints: ``/v3/embeddings``, ``/v3/rerank``, ``/v3/tokenize``, ``/v3/detokenize``."""
