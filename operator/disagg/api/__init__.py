"""The DisaggDeployment v1alpha1 API: models, validation and CRD generation. Imports nothing else of ours."""
