"""Training losses; one per module, registered by name (``--loss_name``)."""

from multiview_plugin.losses.base import LossOutput, MultiViewLoss
from multiview_plugin.losses.contrastive import ContrastiveLoss
from multiview_plugin.losses.global_local import GlobalLocalLoss

__all__ = ["LossOutput", "MultiViewLoss", "ContrastiveLoss", "GlobalLocalLoss"]
