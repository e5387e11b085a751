"""``repogym images build | list`` and ``repogym gc``: the Docker side."""

from __future__ import annotations


def add_parser(sub) -> None:
    parser = sub.add_parser("images", help="build or list the Docker images")
    isub = parser.add_subparsers(dest="images_command", required=True, metavar="ACTION")
    build = isub.add_parser("build", help="build the base image (pulled where a registry answers, else debootstrap) "
                                          "and the default environment image")
    build.add_argument("--force", action="store_true", help="rebuild the base image even if present")
    build.add_argument("--no-pull", action="store_true", help="do not try a registry; build offline")
    build.set_defaults(func=run_build)
    ls = isub.add_parser("list", help="list repogym images")
    ls.set_defaults(func=run_list)
    gc = sub.add_parser("gc", help="remove leftover repogym containers")
    gc.add_argument("--run", default=None, help="only containers of this run id")
    gc.add_argument("--older-than", type=float, default=0.0, help="only containers older than this many seconds")
    gc.add_argument("--dry-run", action="store_true", help="list, do not remove")
    gc.set_defaults(func=run_gc)


def run_build(args) -> int:
    from envs.sandbox.images import build_base_image, ensure_env_image
    build_base_image(force=args.force, pull=not args.no_pull)
    print(ensure_env_image({}, log=print))
    return 0


def run_list(args) -> int:
    from envs.sandbox.docker import docker_client
    for image in docker_client().images.list():
        for tag in image.tags:
            if tag.startswith("repogym/"):
                print(f"{tag}\t{image.short_id}\t{image.attrs['Size'] / 1e6:.0f} MB")
    return 0


def run_gc(args) -> int:
    from envs.sandbox.gc import reap
    names = reap(args.run, args.older_than, args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {len(names)} container(s)" + "".join(f"\n  {n}" for n in names))
    return 0
