"""The names errors start with: the public names of :mod:`syncfree.detection`
(``syncfree.compat.torchvision`` re-exports them)."""
PAD_TARGETS = "syncfree.detection.pad_targets"
TO_TORCHVISION = "syncfree.detection.to_torchvision"
MAKE_STATIC = "syncfree.detection.make_static"
STATIC_MODEL = "syncfree.detection.StaticRCNN"
STATIC_COLLATE = "syncfree.detection.StaticCollate"
POSTPROCESS = "syncfree.detection.postprocess"
