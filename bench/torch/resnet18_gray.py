# torchvision's resnet18 for one-channel images (its first convolution
# takes 1 channel instead of 3; everything else as it ships: 11.2M
# parameters, 20 BatchNorm layers), for the torch benchmarks' MODEL=resnet18
# on Fashion-MNIST, which scripts/ddp_baseline.py reads too.
from torch import nn
from torchvision.models import resnet18


def model(cfg):
    net = resnet18(num_classes=10)
    net.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return net
