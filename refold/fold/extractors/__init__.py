"""The pure extractors of the core: ``rules`` (:mod:`.rules`) and its pattern table (:mod:`.patterns`).

They read events only (no model, no network, no files), so they belong to the fold. The adapters
that do IO (``llamacpp``, ``openai``, ``vllm``) and the registry that names every extractor
(``get_extractor``) live outside the core, in :mod:`refold.extractors`.
"""
