"""The model layer's public names stay exported (port-by-import relies on them)."""

import orchestrator.model as model

MODEL_LAYER = {
    "BatchConfig", "BatchError", "Model", "ModelAPI", "ModelError", "RetryPolicy", "UsageCounter", "active_model",
               "current_usage",
    "get_model", "init_active_model", "model_context", "model_providers", "modelapi", "record_model_usage",
    "usage_scope",
}


def test_model_layer_names_are_exported() -> None:
    assert set(model.__all__) >= MODEL_LAYER
    for name in MODEL_LAYER:
        assert getattr(model, name) is not None


def test_every_exported_name_resolves() -> None:
    for name in model.__all__:
        getattr(model, name)
