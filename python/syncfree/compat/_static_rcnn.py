"""The former home of the static detector, now :mod:`syncfree.detection`:
kept so that models saved whole (``torch.save(static)``) before the move
still load."""
from ..detection.generalized_rcnn import StaticRCNN, make_static  # noqa: F401
from ..detection.transform import pad_targets, to_torchvision  # noqa: F401
