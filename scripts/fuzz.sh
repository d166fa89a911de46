#!/bin/sh
# fuzz.sh: builds the libFuzzer targets in tests/fuzz/ against the model/
# parsers with clang (-fsanitize=fuzzer,address,undefined) and runs each for
# SECONDS (default 60), starting from a small seed corpus written here.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 300 config
#   make fuzz FUZZ_SECONDS=120
#
# Work lives in build/fuzz/: <target> binaries, corpus/<target>/ (grows across
# runs), seeds/<target>/, artifacts/<target>/ (crashing inputs). Replay one
# with: build/fuzz/fuzz_config build/fuzz/artifacts/config/crash-...
# Without clang + libFuzzer (Debian: clang, libclang-rt-dev), the targets are
# built as standalone programs with cc and ASan and replay the seeds and
# corpus only (FUZZ_REPLAY=1 asks for that even with clang: a quick
# regression run). Exits non-zero when a target crashes or fails to build.
set -eu

SECONDS_EACH=${1:-${FUZZ_SECONDS:-60}}
[ $# -gt 0 ] && shift
TARGETS=${*:-"safetensors config json_in vocab tokenize tokenizer_json stored_model pooling"}
OUT=${FUZZ_OUT:-build/fuzz}

cd "$(dirname "$0")/.."
mkdir -p "$OUT"

# The sources each target needs: its parser, the JSON reader and the error
# helper. json_in checks the JSON reader against jansson.
sources() {
    case $1 in
    safetensors) echo "model/format/safetensors.c model/format/json_in.c model/core/errors.c model/format/file_read.c" ;;
    config) echo "model/format/config.c model/format/pooling.c model/format/wide_config.c model/format/int8_check.c model/format/json_in.c" \
        "model/core/errors.c model/format/file_read.c" ;;
    pooling) echo "model/format/pooling.c model/format/json_in.c model/core/errors.c model/format/file_read.c" ;;
    json_in) echo "model/format/json_in.c model/core/errors.c" ;;
    vocab | tokenize) echo "model/tokenize/tokenizer.c model/tokenize/tokenizer_json.c model/tokenize/vocab.c model/format/json_in.c" \
        "model/core/errors.c model/format/file_read.c" ;;
    tokenizer_json) echo "model/tokenize/tokenizer.c model/tokenize/tokenizer_json.c model/tokenize/vocab.c model/format/json_in.c" \
        "model/core/errors.c model/format/file_read.c" ;;
    stored_model) echo "model/encoder/bert_load.c model/encoder/bert_params.c model/encoder/wide.c" \
        "model/tokenize/ngram_hash.c model/format/config.c model/format/pooling.c model/format/wide_config.c model/format/int8_check.c" \
        "model/format/safetensors.c model/tokenize/tokenizer.c model/tokenize/tokenizer_json.c model/tokenize/vocab.c model/format/model_dir.c" \
        "model/core/errors.c model/format/file_read.c model/format/json_in.c" ;;
    *) echo "fuzz.sh: unknown target '$1' (safetensors, config, json_in, vocab, tokenize," \
        "tokenizer_json, stored_model, pooling)" >&2; exit 2 ;;
    esac
}

# Libraries the parsers link (utf8proc for the tokenizer).
LIBS="-lutf8proc -lcjson -ljansson -lm -lpthread -ldl"

# Longest input: a stored model seed holds a whole small model.
max_len() {
    case $1 in
    stored_model) echo 1200000 ;;
    tokenizer_json) echo 400000 ;;
    *) echo 8192 ;;
    esac
}

have_libfuzzer() {
    command -v clang >/dev/null 2>&1 || return 1
    printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n)'\
'{(void)d;(void)n;return 0;}\n' >"$OUT/probe.c"
    clang -fsanitize=fuzzer "$OUT/probe.c" -o "$OUT/probe" >/dev/null 2>&1
}

# Little-endian 8-byte length followed by the header and n zero bytes.
st_seed() { # file header data_bytes
    len=$(printf '%s' "$2" | wc -c)
    i=0
    : >"$1"
    while [ $i -lt 8 ]; do
        # shellcheck disable=SC2059 # the format is the octal escape
        printf "\\$(printf '%03o' $(( (len >> (8 * i)) & 255 )))" >>"$1"
        i=$((i + 1))
    done
    printf '%s' "$2" >>"$1"
    head -c "$3" /dev/zero >>"$1"
}

write_seeds() {
    s=$OUT/seeds/safetensors
    mkdir -p "$s"
    st_seed "$s/one_f32" '{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}' 24
    st_seed "$s/mixed" '{"__metadata__":{"format":"pt"},"a":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]},"c":{"dtype":"F64","shape":[],"data_offsets":[16,24]},"d":{"dtype":"I64","shape":[1],"data_offsets":[24,32]}}' 32
    st_seed "$s/ints" '{"i8":{"dtype":"I8","shape":[3],"data_offsets":[0,3]},"u8":{"dtype":"U8","shape":[1],"data_offsets":[3,4]},"b":{"dtype":"BOOL","shape":[4],"data_offsets":[4,8]},"i32":{"dtype":"I32","shape":[2],"data_offsets":[8,16]}}        ' 16
    st_seed "$s/empty_tensor" '{"e":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},"f":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' 4
    st_seed "$s/no_tensors" '{}      ' 0
    st_seed "$s/odd_fields" '{"__metadata__":{"a":"b","n":1},"s":{"dtype":"F32","shape":"2","data_offsets":[0,8]},"t":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}}' 8
    st_seed "$s/overlap" '{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]},"c":{"dtype":"U8","shape":[1.5],"data_offsets":[24,25]}}' 25

    c=$OUT/seeds/config
    mkdir -p "$c"
    printf '%s' '{"architectures":["BertForMaskedLM"],"attention_probs_dropout_prob":0.1,"hidden_act":"gelu","hidden_dropout_prob":0.1,"hidden_size":768,"initializer_range":0.02,"intermediate_size":3072,"layer_norm_eps":1e-12,"max_position_embeddings":512,"model_type":"bert","num_attention_heads":12,"num_hidden_layers":12,"pad_token_id":0,"type_vocab_size":2,"vocab_size":21128}' >"$c/bert"
    printf '%s' '{"attention_probs_dropout_prob":0.1,"hidden_act":"gelu","hidden_dropout_prob":0.1,"hidden_size":768,"max_position_embeddings":2048,"num_attention_heads":12,"num_hidden_layers":12,"task_type_vocab_size":3,"type_vocab_size":4,"use_task_id":true,"vocab_size":40000,"layer_norm_eps":1e-05,"model_type":"ernie","intermediate_size":3072}' >"$c/ernie"
    printf '%s' '{"model_type":"roberta","vocab_size":50265,"hidden_size":768,"num_hidden_layers":12,"num_attention_heads":12,"intermediate_size":3072,"max_position_embeddings":514,"type_vocab_size":1,"pad_token_id":1,"classifier_dropout":null,"layer_norm_eps":1e-05,"id2label":{"0":"negative","1":"positive"},"label2id":{"negative":0,"positive":1}}' >"$c/roberta"
    printf '%s' '{"vocab_size":100,"hidden_size":32,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":64,"max_position_embeddings":64,"num_labels":3,"do_lower_case":false}' >"$c/small"
    printf '%s' '{"vocab_size":5,"hidden_size":4,"num_hidden_layers":1,"num_attention_heads":3,"intermediate_size":"4","max_position_embeddings":2,"pad_token_id":5,"id2label":{"0":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx","1":""}}' >"$c/errors"
    printf '%s' '[{"model_type":"roberta","pad_token_id":511,"max_position_embeddings":512}]' >"$c/array"
    printf '%s' '{"vocab_size":100,"hidden_size":32,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":64,"max_position_embeddings":64,"wide":{"features":"char_ngrams","ngram_range":[1,3],"buckets":262144,"hash":"murmur3_32","lowercase":"ascii","tf":"sublinear","idf":true,"norm":"l2"}}' >"$c/wide"
    printf '%s' '{"model_type":"xlm-roberta","vocab_size":9,"hidden_size":8.0,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":8,"max_position_embeddings":16,"id2label":{"1":"正面","0":"负面","2":"x"}}' >"$c/labels"
    j=$OUT/seeds/json_in
    mkdir -p "$j"
    cp "$c"/* "$j"/
    printf '%s' '{"a\u00e9\n":"\ud83d\ude00 x\t\"\\ \u4e2d\u6587","b":["\/","\b\f\r","中文"],"\ud834\udd1e":null}' >"$j/escapes"
    printf '%s' '[0,-1,1.5,1e-12,-2.5E+3,9007199254740993,-9223372036854775808,0.1,3.0,-0,1E2,true,false,null,[],{}]' >"$j/numbers"
    printf '%s' '[[[[[[[[{"k":[[{"k":{"":[1]}}]]}]]]]]]]]' >"$j/nesting"
    printf '%s' '{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"__metadata__":{"format":"pt"}}' >"$j/header"

    v=$OUT/seeds/vocab
    mkdir -p "$v"
    { printf '\001'; cat tests/fixtures/vocab.txt; } >"$v/fixture_lower"
    { printf '\000'; cat tests/fixtures/vocab_unicode.txt; } >"$v/unicode_cased"
    printf '\001[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n好\r\n##好\r\n\r\n' >"$v/crlf_minimal"
    printf '\000[CLS]\n[SEP]\n[PAD]\n[CLS]\n[UNK]' >"$v/duplicate_no_newline"

    t=$OUT/seeds/tokenize
    mkdir -p "$t"
    printf '%s' '房间很干净，前台服务热情！Hello WORLD, naïve café.' >"$t/mixed"
    printf 'a\000b\001\002\tc\r\n\342\200\213d\377\376e' >"$t/controls_invalid"
    printf '%s' '😀👍🏽 ＦＵＬＬ　ｗｉｄｔｈ ##sub [UNK] [CLS]' >"$t/emoji_fullwidth"
    head -c 3000 /dev/zero | tr '\000' 'a' >"$t/long_word"

    k=$OUT/seeds/tokenizer_json
    mkdir -p "$k"
    cp tests/fixtures/tokenizer_json/wordpiece/tokenizer.json "$k/wordpiece_fixture"
    # The Unigram fixture with its vocabulary cut to 300 pieces (the
    # Precompiled charsmap kept whole).
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["model"]["vocab"]=j["model"]["vocab"][:300]; j["added_tokens"]=j["added_tokens"][:4]; print(json.dumps(j,ensure_ascii=False))' \
        tests/fixtures/tokenizer_json/unigram/tokenizer.json >"$k/unigram_small"
    printf '%s' '{"normalizer":{"type":"Sequence","normalizers":[{"type":"Replace","pattern":{"Regex":" {2,}"},"content":" "},{"type":"Strip","strip_left":true,"strip_right":true},{"type":"NFKC"},{"type":"Lowercase"}]},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false},"post_processor":{"type":"RobertaProcessing","sep":["</s>",2],"cls":["<s>",0]},"added_tokens":[{"id":4,"content":"<mask>","lstrip":true,"rstrip":false,"normalized":false,"special":true}],"model":{"type":"Unigram","unk_id":3,"byte_fallback":true,"vocab":[["<s>",0],["<pad>",0],["</s>",0],["<unk>",0],["<mask>",0],["<0x41>",-5],["▁",-1],["a",-2],["▁ab",-3.5],["b",-2.5],["好",-1.5]]}}' >"$k/unigram_steps"
    printf '%s' '{"normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":false},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"BertPreTokenizer"},{"type":"WhitespaceSplit"}]},"post_processor":{"type":"BertProcessing","sep":["[SEP]",3],"cls":["[CLS]",2]},"model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":5,"vocab":{"[PAD]":0,"[UNK]":1,"[CLS]":2,"[SEP]":3,"a":4,"##b":5,"好":6}}}' >"$k/wordpiece_small"
    printf '%s' '{"normalizer":{"type":"Precompiled","precompiled_charsmap":"CAAAAAAEAAAAAQAAYQA="},"model":{"type":"Unigram","unk_id":0,"vocab":[["<unk>",0],["a",-1]]}}' >"$k/tiny_charsmap"

    python3 tests/fuzz/make_model_seed.py "$OUT/seeds/stored_model"

    p=$OUT/seeds/pooling
    mkdir -p "$p"
    for v in tests/fixtures/pooling/*/; do
        n=$(basename "$v")
        cp "$v/modules.json" "$p/${n}_modules"
        cp "$v/1_Pooling/config.json" "$p/${n}_pooling"
    done
    printf '%s' '[{"type":"sentence_transformers.models.Transformer","path":""},{"type":"sentence_transformers.models.Pooling","path":"../x"},{"type":"sentence_transformers.models.Dense"}]' >"$p/bad_modules"
    printf '%s' '{"pooling_mode_cls_token":true,"pooling_mode_mean_tokens":true,"pooling_mode_max_tokens":1,"include_prompt":false,"word_embedding_dimension":"384"}' >"$p/bad_pooling"
    printf '%s' '{"mode":"cls","normalize":true}' >"$p/config_key"
}

write_dicts() {
    cat >"$OUT/safetensors.dict" <<'EOF'
"\"dtype\""
"\"shape\""
"\"data_offsets\""
"\"__metadata__\""
"\"F32\""
"\"F16\""
"\"BF16\""
"\"F64\""
"\"I64\""
"\"U8\""
"\"BOOL\""
"\"format\""
"\"pt\""
"{"
"}"
"["
"]"
":"
","
"-1"
"18446744073709551615"
"9223372036854775807"
"1e3"
"\"\\u00e9\""
EOF
    cat >"$OUT/json_in.dict" <<'EOF'
"{"
"}"
"["
"]"
":"
","
"\""
"\\u"
"\\ud800"
"\\udc00"
"\\u0000"
"true"
"false"
"null"
"-0"
"1e"
"E+"
".5"
"9223372036854775807"
"9007199254740993"
"\xc3\xa9"
"\xed\xa0\x80"
"\xf4\x90\x80\x80"
EOF
    cat >"$OUT/config.dict" <<'EOF'
"\"model_type\""
"\"bert\""
"\"ernie\""
"\"roberta\""
"\"xlm-roberta\""
"\"vocab_size\""
"\"hidden_size\""
"\"num_hidden_layers\""
"\"num_attention_heads\""
"\"intermediate_size\""
"\"max_position_embeddings\""
"\"type_vocab_size\""
"\"layer_norm_eps\""
"\"hidden_act\""
"\"gelu\""
"\"pad_token_id\""
"\"use_task_id\""
"\"task_type_vocab_size\""
"\"hidden_dropout_prob\""
"\"attention_probs_dropout_prob\""
"\"classifier_dropout\""
"\"do_lower_case\""
"\"id2label\""
"\"label2id\""
"\"num_labels\""
"true"
"false"
"null"
"1e-12"
"0.1"
"768.0"
"-1"
"{"
"}"
":"
","
EOF
    cat >"$OUT/pooling.dict" <<'EOF'
"\"type\""
"\"path\""
"\"sentence_transformers.models.Transformer\""
"\"sentence_transformers.models.Pooling\""
"\"sentence_transformers.models.Normalize\""
"\"1_Pooling\""
"\"word_embedding_dimension\""
"\"pooling_mode_cls_token\""
"\"pooling_mode_mean_tokens\""
"\"pooling_mode_max_tokens\""
"\"pooling_mode_lasttoken\""
"\"include_prompt\""
"\"mode\""
"\"normalize\""
"\"mean\""
"\"cls\""
"true"
"false"
"{"
"}"
"["
"]"
EOF
    cat >"$OUT/tokenizer_json.dict" <<'EOF'
"\"type\""
"\"Unigram\""
"\"WordPiece\""
"\"vocab\""
"\"unk_id\""
"\"unk_token\""
"\"byte_fallback\""
"\"normalizer\""
"\"pre_tokenizer\""
"\"post_processor\""
"\"added_tokens\""
"\"Sequence\""
"\"normalizers\""
"\"pretokenizers\""
"\"Precompiled\""
"\"precompiled_charsmap\""
"\"Replace\""
"\"pattern\""
"\"Regex\""
"\"String\""
"\"content\""
"\"Strip\""
"\"NFKC\""
"\"Lowercase\""
"\"BertNormalizer\""
"\"Metaspace\""
"\"replacement\""
"\"prepend_scheme\""
"\"first\""
"\"split\""
"\"WhitespaceSplit\""
"\"BertPreTokenizer\""
"\"TemplateProcessing\""
"\"single\""
"\"SpecialToken\""
"\"special_tokens\""
"\"ids\""
"\"lstrip\""
"\"rstrip\""
"{"
"}"
"["
"]"
":"
","
EOF
}

write_seeds
write_dicts
scripts/include-views.sh "$OUT/rooms" # the include path (headers are spelled with their room)
status=0

if [ -z "${FUZZ_REPLAY:-}" ] && have_libfuzzer; then
    for t in $TARGETS; do
        bin=$OUT/fuzz_$t
        echo "== building $bin"
        # $(sources) and $LIBS are lists of words, split on purpose.
        # shellcheck disable=SC2046,SC2086
        clang -g -O1 -std=gnu11 -Wall -Wextra -I"$OUT/rooms/all" \
            -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
            "tests/fuzz/fuzz_$t.c" $(sources "$t") $LIBS -o "$bin"
        mkdir -p "$OUT/corpus/$t" "$OUT/artifacts/$t"
        dict=""
        [ -f "$OUT/$t.dict" ] && dict="-dict=$OUT/$t.dict"
        echo "== fuzzing $t for ${SECONDS_EACH}s"
        if ! "$bin" -max_total_time="$SECONDS_EACH" -print_final_stats=1 \
            -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 \
            ${dict:+"$dict"} \
            -artifact_prefix="$OUT/artifacts/$t/" \
            "$OUT/corpus/$t" "$OUT/seeds/$t"; then
            echo "fuzz.sh: $t crashed; inputs in $OUT/artifacts/$t/" >&2
            status=1
        fi
    done
else
    [ -n "${FUZZ_REPLAY:-}" ] ||
        echo "fuzz.sh: clang with libFuzzer not found (Debian: apt-get" \
            "install clang libclang-rt-dev); replaying the corpus only" >&2
    for t in $TARGETS; do
        bin=$OUT/replay_$t
        # $(sources) and $LIBS are lists of words, split on purpose.
        # shellcheck disable=SC2046,SC2086
        ${CC:-cc} -g -O1 -std=gnu11 -Wall -Wextra -I"$OUT/rooms/all" -DFUZZ_STANDALONE \
            -fsanitize=address,undefined -fno-sanitize-recover=undefined \
            "tests/fuzz/fuzz_$t.c" $(sources "$t") $LIBS -o "$bin"
        mkdir -p "$OUT/corpus/$t"
        # shellcheck disable=SC2046
        if ! "$bin" $(find "$OUT/seeds/$t" "$OUT/corpus/$t" -type f); then
            status=1
        fi
    done
fi
exit $status
