"""Policies: the tiny Llama built and warm-started here (``tiny``, ``tokenizer``), loading any causal LM
with LoRA (``policy``), the multi-turn context format shared by rollouts and the warm start
(``context``), and the Hugging Face / KV-cache helpers that decoding and cross-scoring share (``hf``)."""
