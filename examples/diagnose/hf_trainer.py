"""A real Hugging Face client: ``transformers.Trainer`` fine-tunes a tiny GPT-2 built from
``GPT2Config`` (no download) on random tokens, on the CPU. ``perfkit diagnose`` finds its
steps through the optimizer that Trainer (via accelerate) steps.

    python -m perfkit diagnose examples/diagnose/hf_trainer.py
"""

import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 512

    def __getitem__(self, i: int) -> dict:
        ids = torch.randint(0, 256, (32,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def main(steps: int = 30) -> None:
    cfg = GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=2,
                     bos_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=8,
                                 max_steps=steps, use_cpu=True, report_to=[],
                                 logging_steps=10, save_strategy="no",
                                 dataloader_num_workers=0, disable_tqdm=True)
        Trainer(model=model, args=args, train_dataset=RandomTokens()).train()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
