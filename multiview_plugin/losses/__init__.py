"""Training losses; one per module, registered by name (``--loss_name``)."""

from multiview_plugin.losses.base import LossOutput, MultiViewLoss
from multiview_plugin.losses.contrastive import ContrastiveLoss
from multiview_plugin.losses.global_local import GlobalLocalLoss
from multiview_plugin.losses.self_contrastive import SelfContrastiveLoss

__all__ = ["LossOutput", "MultiViewLoss", "ContrastiveLoss", "GlobalLocalLoss", "SelfContrastiveLoss"]
