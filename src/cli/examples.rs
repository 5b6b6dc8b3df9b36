//! The `Examples:` that end each command's `--help`, as kubectl's and flux's do.

pub const WEFT: &str = "\
Examples:
  weft validate ./config                 # check a checkout, no cluster
  weft diff --repo https://github.com/org/config.git
  weft sync ./config --dry-run
  weft get                               # what is ready, as `flux get all`
  weft trigger --wait                    # sync now, as `flux reconcile`

Weft's own namespace is --weft-namespace (WEFT_NAMESPACE, default weft-system); -n/--namespace
is the namespace of the objects a command shows, as in kubectl.";

pub const RENDER: &str = "\
Examples:
  weft render ./config > objects.yaml
  weft render --repo https://github.com/org/config.git --ref v1.2.0 --path clusters/prod
  weft render ./config --age-key-file key.agekey --show-secrets";

pub const VALIDATE: &str = "\
Examples:
  weft validate ./config
  weft validate --repo https://github.com/org/config.git --path clusters/prod";

pub const CRDS: &str = "\
Examples:
  weft crds | kubectl apply --server-side -f -";

pub const SYNC: &str = "\
Examples:
  weft sync ./config
  weft sync --repo https://github.com/org/config.git --ref main --path clusters/prod
  weft sync ./config --dry-run                   # the plan, nothing written
  weft sync ./config -o json | jq .summary       # progress on stderr, the result on stdout
  weft sync ./config --timeout 10m --weft-namespace weft-system";

pub const DIFF: &str = "\
Examples:
  weft diff ./config
  weft diff --repo https://github.com/org/config.git --path clusters/prod
  weft diff ./config -o yaml";

pub const RUN: &str = "\
Examples:
  weft run --repo https://github.com/org/config.git --ref main --interval 1m
  weft run --repo git@github.com:org/config.git --git-secret weft-git --shards 3
(In a cluster, deploy/20-deployment.yaml sets these through WEFT_* variables.)";

pub const TRIGGER: &str = "\
Examples:
  weft trigger                           # ask for a pass; only a kubeconfig is needed
  weft trigger --wait                    # wait for the pass that answers, print its result
  weft trigger --wait --force-prune      # this one pass may prune past --max-prune-fraction
  weft trigger --sync-token-file token --url http://weft.weft-system:8081   # over HTTP";

pub const GET: &str = "\
Examples:
  weft get                               # every root, WeaveCloud and Armada resource
  weft get charts -n openstack           # the ArmadaCharts of one namespace
  weft get root -o yaml
  weft get root prod                     # one root; an error naming the roots if there is no `prod`
  weft get all --wait --timeout 10m      # wait until everything is ready";

pub const SUSPEND: &str = "\
Examples:
  weft suspend -m \"incident 42: hands off\"
  weft suspend --root-name tenant-a --weft-namespace tenant-a-weft
  weft suspend --create --repo https://git.example/site.git --root-name new-site   # before its first pass";

pub const RESUME: &str = "\
Examples:
  weft resume
  weft resume --root-name tenant-a";

pub const UNINSTALL: &str = "\
Examples:
  kubectl -n weft-system scale deployment/weft --replicas 0 && weft uninstall
  weft uninstall --prune                 # also delete what Weft created";

pub const VERSION: &str = "\
Examples:
  weft version
  weft version --client                  # no cluster";

pub const COMPLETION: &str = "\
Examples:
  source <(weft completion bash)
  weft completion zsh > \"${fpath[1]}/_weft\"
  weft completion fish > ~/.config/fish/completions/weft.fish";

pub const UI: &str = "\
Examples:
  weft ui                                # http://127.0.0.1:9292
  weft ui --port 8090 --repo ./config    # with drift against a checkout
  weft ui --weft-namespace tenant-a-weft --root-name tenant-a";

pub const TREE: &str = "\
Examples:
  weft tree                              # the root weft, as `flux tree ks flux-system`
  weft tree --root-name apps -o json";

pub const EXPORT: &str = "\
Examples:
  weft export > weft-resources.yaml      # as `flux export`
  weft export -n openstack               # one namespace's resources (and the root's configuration)";
