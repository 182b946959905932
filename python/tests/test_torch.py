"""One training step of a small network on a nostall batch."""

import torch

import nostall


def test_one_training_step_updates_the_model(photos):
    torch.manual_seed(0)
    loader = nostall.Loader(photos, batch_size=8, image_size=64, threads=1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(8, len(loader.classes)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    images, labels = next(iter(loader))
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    assert loader.classes == ["flowers", "grass", "leaves", "water"]
