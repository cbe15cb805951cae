// Anchor for the shared precompiled header (<torch/torch.h>).
