"""The model zoo: a tokenizer and a small Llama family trained on the Python standard library.

No model can come from a hub, so the project trains its own from text every machine has.
corpus -> tokenizer -> models (configs) -> train (the loop). Entry point: experiments/train.py.
"""
