set -e
out=$(graphserve export mymodel:build --name doubler --base-path models \
        --input x:float32:-1,3 --batch-sizes 1,32 --keep 3 --output json)
version=$(echo "$out" | python -c 'import json,sys; print(json.load(sys.stdin)["version"])')
graphserve inspect models/doubler/$version   # exit 1 would mean it is not loadable
