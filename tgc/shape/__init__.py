from tgc.shape.view import IntBuilder, View, ViewStack, strides_for_shape

__all__ = ["View", "ViewStack", "IntBuilder", "strides_for_shape"]
