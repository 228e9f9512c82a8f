"""PyTorch twin of examples/quickstart_eager (the FashionMNIST quickstart of PyTorch's tutorial):
the same MLP (784-512-512-10), SGD lr 1e-3, batch 64, shuffled, cross-entropy, one test pass per
epoch, on --device (cpu or cuda). Reads the same gzip IDX files as flow (no torchvision needed).
bench/cuda_quickstart.sh times it beside flow's quickstarts: run with --epochs 1 and 3, the
difference is two epochs of training and testing without start-up.
Usage: python3 bench/torch_quickstart.py --data DIR --epochs N --device cuda"""
import argparse
import gzip
import struct

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def dataset(root, train):
    prefix = "train" if train else "t10k"
    images = read_idx(f"{root}/{prefix}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    labels = read_idx(f"{root}/{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    return TensorDataset(torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels))


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(nn.Linear(28 * 28, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))

    def forward(self, x):
        return self.linear_relu_stack(self.flatten(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device(args.device)
    train_loader = DataLoader(dataset(args.data, True), batch_size=64, shuffle=True)
    test_loader = DataLoader(dataset(args.data, False), batch_size=64)
    model = NeuralNetwork().to(device)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        model.train()
        for batch, (x, y) in enumerate(train_loader):
            x, y = x.to(device), y.to(device)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if batch % 100 == 0:
                print(f"loss: {loss.item():>7f}  [{batch * 64:>5d}/{len(train_loader.dataset):>5d}]")
        model.eval()
        test_loss, correct = 0.0, 0
        with torch.no_grad():
            for x, y in test_loader:
                x, y = x.to(device), y.to(device)
                pred = model(x)
                test_loss += loss_fn(pred, y).item()
                correct += (pred.argmax(1) == y).type(torch.float).sum().item()
        print(f"Epoch {epoch + 1}: Accuracy: {100 * correct / len(test_loader.dataset):>0.1f}%, Avg loss: {test_loss / len(test_loader):>8f}")


if __name__ == "__main__":
    main()
