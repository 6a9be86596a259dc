#!/bin/sh
# gpt's command line against bad values, and greedy sampling (ctest example_gpt_cli).
# usage: test_cli.sh GPT CHECKPOINT   (CHECKPOINT: a tiny run's --save, example_gpt_tiny's)
gpt=$1 ckpt=$2
fail() { echo "FAIL: $*"; exit 1; }

# A bad value is a usage error naming the flag, before any work.
for case in "--eval-every 0|--eval-every: must be >= 1, got 0" "--log-every 0|--log-every: must be >= 1, got 0" \
            "--iters -1|--iters: must be >= 0, got -1" "--batch-size 0|--batch-size: must be >= 1, got 0" \
            "--block-size 0|--block-size: must be >= 1, got 0" "--eval-iters 0|--eval-iters: must be >= 1, got 0" \
            "--n-embd 0|--n-embd: must be >= 1, got 0" "--sample -5|--sample: must be >= 0, got -5" \
            "--temperature -1|--temperature: must be >= 0, got -1" "--top-k -3|--top-k: must be >= 0, got -3" \
            "--lr x|--lr: must be a finite number >= 0, got x" "--lr inf|--lr: must be a finite number >= 0, got inf" \
            "--dropout 1|--dropout: must be in [0, 1), got 1" "--iters 0x10|--iters: must be a decimal integer >= 0" \
            "--iters 99999999999999999999|--iters: must be >= 0 and below 2^63" \
            "--seed -1|--seed: must be a decimal integer in [0, 2^64), got -1" \
            "--text /dev/zero|cannot read /dev/zero: not a regular file" "--save .|--save: cannot write .: it is a directory" \
            "--save /nonexistent-dir/x.safetensors|cannot write /nonexistent-dir/x.safetensors: no directory"; do
  args=${case%%|*} want=${case#*|}
  # shellcheck disable=SC2086
  out=$("$gpt" --device cpu --tiny --iters 0 $args 2>&1) && fail "gpt $args exited with 0"
  case $out in *"$want"*) ;; *) fail "gpt $args: expected '$want', got: $out" ;; esac
done

# --temperature 0 takes the likeliest character: the seed changes nothing.
sample() { "$gpt" --device cpu --tiny --iters 0 --resume "$ckpt" --sample 60 --temperature 0 --seed "$1" | sed -n '/^---- sample/,$p'; }
a=$(sample 1) || fail "greedy sampling failed"
b=$(sample 2) || fail "greedy sampling failed"
[ -n "$a" ] || fail "no sample printed"
[ "$a" = "$b" ] || fail "greedy samples differ between seeds: '$a' / '$b'"
# A temperature whose 1 / T is past f32's range is greedy too (not NaN weights).
e=$("$gpt" --device cpu --tiny --iters 0 --resume "$ckpt" --sample 60 --temperature 1e-300 --seed 3 | sed -n '/^---- sample/,$p') ||
  fail "sampling at temperature 1e-300 failed"
[ "${e#*)}" = "${a#*)}" ] || fail "temperature 1e-300 is not greedy: '$e' / '$a'"
# The checkpoint carries its shape: without --tiny the run takes it, a flag that disagrees is an error.
"$gpt" --device cpu --iters 0 --resume "$ckpt" --sample 5 > /dev/null || fail "resuming without the run's flags failed"
out=$("$gpt" --device cpu --iters 0 --resume "$ckpt" --n-head 4 2>&1) && fail "a --n-head that disagrees with the checkpoint exited with 0"
case $out in *"was saved with --n-head 2, the run asks for 4"*) ;; *) fail "--n-head 4: got: $out" ;; esac
# At temperature 1 the seed decides (60 characters: a collision would be a broken generator).
c=$("$gpt" --device cpu --tiny --iters 0 --resume "$ckpt" --sample 60 --seed 1 | sed -n '/^---- sample/,$p')
d=$("$gpt" --device cpu --tiny --iters 0 --resume "$ckpt" --sample 60 --seed 2 | sed -n '/^---- sample/,$p')
[ "$c" != "$d" ] || fail "samples at temperature 1 are equal for seeds 1 and 2"
echo "gpt command line: ok"
