"""disagg-operator: deploys and runs vLLM prefill/decode disaggregated serving on Kubernetes."""

__version__ = "0.1.0"
