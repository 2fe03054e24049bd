# torchvision's resnet18 as it ships (Debian's python3-torchvision), for
# torch_resnet.sh: a model that nobody here wrote, 11.2M parameters with
# BatchNorm, on CIFAR-shaped data.
from torchvision.models import resnet18


def model(cfg):
    return resnet18(num_classes=cfg["model"]["args"].get("classes", 10))
