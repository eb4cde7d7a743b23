"""Export nanoformer models as self-contained Hugging Face Hub repos and push them."""
