"""Tiny random models built locally (nothing downloaded): the tests' backbones and the recipes' ``--smoke`` mode."""

from __future__ import annotations

from pathlib import Path

WORDS = (
    "the a an of in on and or to is was who what when where which how many year city river king queen "
    "paris france london england rome italy berlin germany capital built founded wrote book play music "
    "war peace science physics water fire earth moon sun star planet cat dog bird fish tree flower "
    "red green blue large small old new first last north south east west people language french english"
).split()


def make_tiny_bert(folder: str | Path, hidden: int = 32, layers: int = 2, seed: int = 0, positions: int = 128) -> Path:
    """A 2-layer, 32-dim random BERT with a WordPiece vocabulary of common words and characters."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *"abcdefghijklmnopqrstuvwxyz0123456789.,?'"]
    vocab += [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(folder)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=positions)
    BertModel(config).save_pretrained(folder)
    return folder


def make_tiny_t5(folder: str | Path, seq2seq: bool = False, seed: int = 0) -> Path:
    """A tiny random T5 with a word-level tokenizer: the encoder only, or (``seq2seq``) a whole
    encoder-decoder that stands in for a doc2query generator."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, T5Config, T5EncoderModel, T5ForConditionalGeneration

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {t: i for i, t in enumerate(["<pad>", "</s>", "<unk>", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(folder)
    torch.manual_seed(seed)
    layers = 2 if seq2seq else 3
    config = T5Config(vocab_size=len(vocab), d_model=32, d_kv=8, d_ff=64, num_layers=layers, num_decoder_layers=2,
                      num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    (T5ForConditionalGeneration if seq2seq else T5EncoderModel)(config).save_pretrained(folder)
    return folder
