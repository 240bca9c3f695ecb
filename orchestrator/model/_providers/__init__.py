"""Model provider backends (``ModelAPI`` implementations), one module per backend."""
