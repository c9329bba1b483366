#!/usr/bin/env bash
# End-to-end: gemtrain train leaves a checkpoint in its run directory;
# gemtrain decode loads it (the model's config comes with it) and continues a
# prompt. The decoder, loading the checkpoint, reproduces the closing sample that the
# training process drew in memory with the same sampler and seed (so saving,
# loading and decoding lose nothing); greedy and seeded sampling repeat
# exactly; top-k = 1 and temperature 0 are greedy; the report lines are there;
# bad input is refused with one line; sampling keys greedy does not read are
# noted; a messages_path record samples the same whatever comes before it;
# --interactive puts the replies alone on standard output.
# Usage: e2e_decode.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
work=$(mktemp -d /tmp/gt_e2e_decode.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$src/tools/kjv.sh" "$work/kjv.txt" >/dev/null
head -c 200000 "$work/kjv.txt" > "$work/corpus.txt"
fail() { echo "FAIL: $*"; exit 1; }

"$bin" train model_name=gemma3-tiny dataset_type=text "dataset_path=$work/corpus.txt" steps=30 learning_rate=0.01 \
  eval_interval=-1 sample_tokens=40 "sample_prompt=In the beginning" init_weights_seed=3 \
  "base_output_directory=$work/runs" run_name=a > "$work/train.log"
run=("load_parameters_path=$work/runs/a")
dec() { "$bin" decode "${run[@]}" "$@"; }

# 1. the training sample again: temperature 0.7, seed 0x5EED0000 + init_weights_seed
dec "prompt=In the beginning" max_decode_steps=40 decode_sampling_strategy=weighted \
  decode_sampling_temperature=0.7 decode_seed=$((0x5EED0000 + 3)) > "$work/w.log"
want=$(sed -n '/^sample (/,$p' "$work/train.log" | tail -n +2 | sed '/^run_name=/,$d') # the run's closing line follows
got=$(sed -n '/^output: /,$p' "$work/w.log" | sed '1s/^output: //')
[ -n "$want" ] || fail "no sample in the training log"
[ "$got" = "$want" ] || fail "decode's sample '$got' is not the training sample '$want'"

# 2. the report
dec prompt="And God said" max_decode_steps=24 --ids > "$work/g1.log"
grep -q '^model: gemma3-tiny, 6 layers (5 local with window 16, 1 global), d=64, vocab=260; parameters from ' "$work/g1.log" \
  || fail "no model line"
# 13 prompt tokens (<bos> + 12 bytes) + 23 fed back = 36 positions; kv rows of 2 heads x 16 floats
# = 128 bytes: 5 local layers x 2 x 16 rows + 1 global x 2 x 36 rows = 29696 bytes
grep -q '^kv cache: 29696 bytes (0.028 MiB) for 36 positions (local layers keep the last 16, global layers all)$' "$work/g1.log" \
  || { cat "$work/g1.log"; fail "kv cache line"; }
grep -Eq '^prefill: 13 tokens in [0-9.]+ s, [0-9.]+ tokens/s$' "$work/g1.log" || fail "no prefill tokens/s"
grep -Eq '^generate: [0-9]+ tokens in [0-9.]+ s, [0-9.]+ tokens/s \((max_decode_steps reached|stopped at <eos>)\)$' "$work/g1.log" \
  || fail "no generation tokens/s"
grep -q '^output: And God said' "$work/g1.log" || fail "output does not start with the prompt"
ids() { sed -n 's/^ids: //p' "$1"; }
n=$(ids "$work/g1.log" | tr -cd ',' | wc -c)
grep -q 'max_decode_steps reached' "$work/g1.log" && { [ "$n" = 23 ] || fail "24 steps gave $((n + 1)) ids"; }

# 3. greedy repeats; top-k 1 and temperature 0 are greedy; seeded sampling repeats
dec prompt="And God said" max_decode_steps=24 --ids > "$work/g2.log"
[ "$(ids "$work/g1.log")" = "$(ids "$work/g2.log")" ] || fail "greedy decoding is not deterministic"
dec prompt="And God said" max_decode_steps=24 --ids decode_sampling_strategy=topk decode_sampling_top_k=1 decode_seed=5 > "$work/k1.log"
[ "$(ids "$work/k1.log")" = "$(ids "$work/g1.log")" ] || fail "top-k 1 differs from greedy"
dec prompt="And God said" max_decode_steps=24 --ids decode_sampling_strategy=nucleus decode_sampling_nucleus_p=0.9 \
  decode_sampling_temperature=0 > "$work/t0.log"
[ "$(ids "$work/t0.log")" = "$(ids "$work/g1.log")" ] || fail "temperature 0 differs from greedy"
for s in weighted topk nucleus; do
  args=(prompt="And God said" max_decode_steps=24 --ids decode_sampling_strategy=$s decode_sampling_top_k=10
        decode_sampling_nucleus_p=0.9 decode_sampling_temperature=1.2)
  dec "${args[@]}" decode_seed=11 > "$work/s1.log"
  dec "${args[@]}" decode_seed=11 > "$work/s2.log"
  [ "$(ids "$work/s1.log")" = "$(ids "$work/s2.log")" ] || fail "$s sampling with one seed differs"
done

# 4. refusals: one line, naming the problem, non-zero exit
refuse() { # expected-substring args...
  local want="$1"; shift
  set +e; "$bin" decode "$@" > "$work/out.log" 2> "$work/err.log"; local rc=$?; set -e
  [ $rc -ne 0 ] || fail "'$*' was accepted"
  [ "$(wc -l < "$work/err.log")" = 1 ] || { cat "$work/err.log"; fail "'$*' printed more than one error line"; }
  grep -qF -- "$want" "$work/err.log" || { cat "$work/err.log"; fail "'$*' error lacks '$want'"; }
}
refuse "key 'load_parameters_path' is not set" prompt=x
refuse "$work/none" "load_parameters_path=$work/none"
refuse "key 'base_emb_dim' = 32 is set explicitly, but the checkpoint '$work/runs/a/checkpoints/step_" \
  "${run[@]}" prompt=x base_emb_dim=32
echo "not safetensors" > "$work/junk.safetensors"
refuse "$work/junk.safetensors" "load_parameters_path=$work/junk.safetensors"
refuse "decode_sampling_top_k = 0; decode_sampling_strategy=topk needs 1 .. vocab_size (260)" \
  "${run[@]}" decode_sampling_strategy=topk
refuse "decode_sampling_nucleus_p = -1; decode_sampling_strategy=nucleus needs 0 < p <= 1" \
  "${run[@]}" decode_sampling_strategy=nucleus
refuse "key 'decode_sampling_strategy'" "${run[@]}" decode_sampling_strategy=beam
refuse "unknown option '--bogus'" "${run[@]}" --bogus
refuse "key 'messages_path' is set with key 'prompt'" "${run[@]}" messages_path=x prompt=y
refuse "key 'messages_path' is set with --interactive" "${run[@]}" messages_path=x --interactive
refuse "cannot open messages_path '$work/none.jsonl'" "${run[@]}" "messages_path=$work/none.jsonl"
echo '{"turns": []}' > "$work/bad.jsonl"
refuse "'$work/bad.jsonl' line 1 has no \"messages\" list" "${run[@]}" "messages_path=$work/bad.jsonl"
echo '{"messages": [{"role": "system", "content": "x"}]}' > "$work/sys.jsonl"
refuse "the conversation's last message has role 'system'" "${run[@]}" "messages_path=$work/sys.jsonl"
refuse "key 'stop' = [\"a\", 1] is a list with an element that is not a non-empty string" "${run[@]}" 'stop=["a", 1]'
# byte tokens are for a model of 260 ids: one of another vocabulary with no
# tokenizer (here an HF directory without tokenizer.json; a run on
# Gemma-tokenized shards records none either) is refused, naming
# tokenizer_path, not fed its prompt as bytes; --ids and a chat are no exception
byte_refusal="decode: text without a tokenizer is read as byte tokens (260 ids), but the model's vocab_size is"
"$bin" convert to_hf init "$work/v512" model_name=gemma3-tiny vocab_size=512 dtype=float32 > /dev/null
"$bin" convert to_hf init "$work/v200" model_name=gemma3-tiny vocab_size=200 dtype=float32 > /dev/null
refuse "$byte_refusal 512: its vocabulary is another; set tokenizer_path to the model's tokenizer.json" \
  "load_parameters_path=$work/v512" "prompt=And God said" max_decode_steps=4 --ids
refuse "$byte_refusal 512" "load_parameters_path=$work/v512" chat=true prompt=x max_decode_steps=4
refuse "$byte_refusal 200" "load_parameters_path=$work/v200" prompt=x max_decode_steps=4
# thinking is Gemma 4's chat mode: refused on Gemma 3's template, and without a chat
refuse "key 'enable_thinking' = true, but the chat template is Gemma 3's, which has no thinking mode" \
  "${run[@]}" chat=true prompt=x enable_thinking=true
refuse "key 'enable_thinking' = true, but the prompt is not a chat" "${run[@]}" prompt=x enable_thinking=true
echo '{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image", "url": "x.png"}]}]}' \
  > "$work/img.jsonl"
refuse "'$work/img.jsonl' line 1: messages[0].content[1] is a part of type 'image'; decoding takes text parts only" \
  "${run[@]}" "messages_path=$work/img.jsonl"
# sampling keys greedy does not read: a note naming each, and greedy's tokens
dec prompt="And God said" max_decode_steps=24 --ids decode_sampling_temperature=0.8 decode_seed=3 \
  > "$work/gn.log" 2> "$work/gn.err"
note_tail="has no effect with decode_sampling_strategy=greedy (the most likely token each step); set"
note_tail="$note_tail decode_sampling_strategy to weighted, topk or nucleus to sample"
for k in decode_sampling_temperature decode_seed; do
  grep -qxF "decode: key '$k' $note_tail" "$work/gn.err" \
    || { cat "$work/gn.err"; fail "no note on $k under greedy"; }
done
[ "$(wc -l < "$work/gn.err")" = 2 ] || { cat "$work/gn.err"; fail "notes on keys that were not set"; }
[ "$(ids "$work/gn.log")" = "$(ids "$work/g1.log")" ] || fail "greedy with an unread temperature differs from greedy"
dec prompt="And God said" max_decode_steps=4 decode_sampling_strategy=weighted decode_sampling_temperature=0.8 \
  > /dev/null 2> "$work/wn.err"
[ ! -s "$work/wn.err" ] || { cat "$work/wn.err"; fail "a note with a strategy that reads the keys"; }
# messages_path: record k samples from stream k of decode_seed, so a record's
# tokens do not depend on how many draws the records before it took: the
# second record's 12 tokens are the first 12 of its 24 (the first record took
# 12 draws, then 24)
printf '%s\n' '{"messages": [{"role": "user", "content": "And God said"}]}' \
  '{"messages": [{"role": "user", "content": "In the beginning"}]}' > "$work/two.jsonl"
for m in 12 24; do
  dec "messages_path=$work/two.jsonl" max_decode_steps=$m decode_sampling_strategy=weighted decode_seed=4 --ids \
    > "$work/rec$m.log"
done
[ "$(grep -c 'max_decode_steps reached' "$work/rec12.log")" = 2 ] && [ "$(grep -c 'max_decode_steps reached' "$work/rec24.log")" = 2 ] \
  || fail "a record stopped early: the draws they took are not 12 and 24"
second12=$(ids "$work/rec12.log" | sed -n 2p | tr -d '[]'); second24=$(ids "$work/rec24.log" | sed -n 2p | tr -d '[]')
[ "${second24#"$second12", }" != "$second24" ] \
  || fail "the second record's tokens depend on the first's draws: [$second12] is not the start of [$second24]"
# record 0 draws from the seed's own stream: a one-record file answers as chat=true
head -1 "$work/two.jsonl" > "$work/one.jsonl"
dec "messages_path=$work/one.jsonl" max_decode_steps=12 decode_sampling_strategy=weighted decode_seed=4 --ids > "$work/one.log"
dec chat=true "prompt=And God said" max_decode_steps=12 decode_sampling_strategy=weighted decode_seed=4 --ids > "$work/chat1.log"
[ "$(ids "$work/one.log")" = "$(ids "$work/chat1.log")" ] || fail "record 0 does not sample as chat=true with its seed"
# --interactive: standard output holds the replies alone (the model and
# tokenizer lines, the chat line and each turn's figures go to standard
# error); its first reply is chat=true's output for the same turn
dec chat=true "prompt=And God said" max_decode_steps=12 > "$work/chat12.log"
sed -n '/^output: /,$p' "$work/chat12.log" | sed '1s/^output: //' > "$work/reply1.want"
printf 'And God said\n' | dec --interactive max_decode_steps=12 > "$work/i1.out" 2> "$work/i1.err"
cmp -s "$work/i1.out" "$work/reply1.want" \
  || { cat "$work/i1.out"; fail "--interactive's standard output is not the reply alone"; }
for l in '^model: gemma3-tiny, ' '^tokenizer: byte tokens$' '^chat: one user turn per line' '^prefill: '; do
  grep -q "$l" "$work/i1.err" || { cat "$work/i1.err"; fail "--interactive's standard error lacks '$l'"; }
done
printf 'And God said\nIn the beginning\n' | dec --interactive max_decode_steps=12 > "$work/i2.out" 2> "$work/i2.err"
[ "$(grep -c '^prefill: ' "$work/i2.err")" = 2 ] || { cat "$work/i2.err"; fail "two turns, not two figures lines"; }
[ "$(head -c "$(wc -c < "$work/i1.out")" "$work/i2.out")" = "$(cat "$work/i1.out")" ] \
  || fail "the first of two turns' replies is not the one-turn reply"
# a stop string ends the plain continuation too: the output ends before it
dec prompt="And God said" max_decode_steps=24 --ids > "$work/free.log"
cont=$(sed -n 's/^output: And God said//p' "$work/free.log")
[ ${#cont} -ge 8 ] || fail "too short a continuation to take a stop string from: '$cont'"
# three plain ASCII characters from it (the output is escaped: never part of a \xNN)
stop=; i=0
while [ -z "$stop" ] && [ $((i + 3)) -le ${#cont} ]; do
  piece=${cont:$i:3}
  before=${cont:$((i - 5 < 0 ? 0 : i - 5)):$((i < 5 ? i : 5))}
  if [ $i -ge 2 ] && [[ "$before" != *\\* ]] && LC_ALL=C grep -qx '[A-Za-z0-9 ,.;:]\{3\}' <<< "$piece"; then
    stop=$piece
  fi
  i=$((i + 1))
done
[ -n "$stop" ] || fail "no plain three characters in the continuation '$cont'"
pre=${cont%%"$stop"*}
dec prompt="And God said" max_decode_steps=24 "stop=$stop" > "$work/stop.log"
grep -qxF "output: And God said$pre" "$work/stop.log" && grep -q '(stopped at stop string 1)$' "$work/stop.log" \
  || { cat "$work/stop.log"; fail "stop='$stop' did not end the output before it (expected '$pre')"; }
"$bin" decode --help | grep -q 'load_parameters_path' || fail "decode --help"
"$bin" --help | grep -q '^  decode' || fail "gemtrain --help does not list decode"
echo "e2e_decode: 1 passed, 0 failed"
