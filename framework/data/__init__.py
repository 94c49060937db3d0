"""Training text as token data of one tokenizer: sources (Hydra group `data=`), chat templates with
assistant-only labels, the target's own answers (regeneration), int32 ids with the tokenizer recorded."""
