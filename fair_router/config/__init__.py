"""Settings: the YAML/env settings model, and the annotated types every value is validated by."""
