// Command helper is the container program of the node agent's tests. It runs its arguments as
// actions, in order, so one binary can play every container a test needs:
//
//	--to=PATH             later output goes to PATH (appended; "-" is stdout)
//	--print=TEXT          write TEXT and a newline
//	--cat=PATH            write the file at PATH
//	--env                 write the environment, sorted, one NAME=value a line
//	--args                write every argument, one a line
//	--stat=PATH           write the permission bits of PATH (links followed) in octal
//	--backend-config=V    remember V; config_path=PATH names the kubeconfig of --whoami
//	--whoami              write the user the kubeconfig authenticates as (SelfSubjectReview)
//	--marker=PATH         append lifecycle lines to PATH: "start PID", "term", "child PID"
//	--ignore-term         ignore SIGTERM (still noted in the marker)
//	--term-exit=N         exit with N on SIGTERM (default 143)
//	--spawn               start a child in a session of its own that sleeps, and note its PID
//	--sleep               wait for SIGTERM (forever with --ignore-term)
//	--exit=N              exit with N once the actions are done
//	--fail-once=PATH      exit with 7 unless PATH exists, creating it: fails the first run only
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	markerMu   sync.Mutex
	markerPath string
)

func mark(line string) {
	markerMu.Lock()
	defer markerMu.Unlock()
	if markerPath == "" {
		return
	}
	f, err := os.OpenFile(markerPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var out io.Writer = os.Stdout
	var closeOut func() error
	setOut := func(path string) error {
		if closeOut != nil {
			if err := closeOut(); err != nil {
				return err
			}
			closeOut = nil
		}
		if path == "-" {
			out = os.Stdout
			return nil
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		out, closeOut = f, f.Close
		return nil
	}
	defer func() {
		if closeOut != nil {
			_ = closeOut()
		}
	}()

	var ignoreTerm atomic.Bool
	termExit := 143
	exitCode := 0
	kubeconfig := ""
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	var termOnce sync.Once
	termed := make(chan struct{})
	go func() {
		for range terms {
			mark("term")
			if !ignoreTerm.Load() {
				termOnce.Do(func() { close(termed) })
			}
		}
	}()

	for _, arg := range args {
		name, value, _ := strings.Cut(arg, "=")
		var err error
		switch name {
		case "--to":
			err = setOut(value)
		case "--print":
			_, err = fmt.Fprintln(out, value)
		case "--cat":
			var data []byte
			if data, err = os.ReadFile(value); err == nil {
				_, err = out.Write(data)
			}
		case "--env":
			env := os.Environ()
			sort.Strings(env)
			_, err = fmt.Fprintln(out, strings.Join(env, "\n"))
		case "--args":
			_, err = fmt.Fprintln(out, strings.Join(args, "\n"))
		case "--stat":
			var info os.FileInfo
			if info, err = os.Stat(value); err == nil {
				_, err = fmt.Fprintf(out, "%04o\n", info.Mode().Perm())
			}
		case "--backend-config":
			if p, ok := strings.CutPrefix(value, "config_path="); ok {
				kubeconfig = p
			}
		case "--whoami":
			var user string
			if user, err = whoami(kubeconfig); err == nil {
				_, err = fmt.Fprintln(out, user)
			}
		case "--marker":
			markerMu.Lock()
			markerPath = value
			markerMu.Unlock()
			mark("start " + strconv.Itoa(os.Getpid()))
		case "--ignore-term":
			ignoreTerm.Store(true)
		case "--term-exit":
			termExit, err = strconv.Atoi(value)
		case "--spawn":
			err = spawn()
		case "--sleep":
			<-termed
			return exitWith(termExit, closeOut)
		case "--exit":
			exitCode, err = strconv.Atoi(value)
		case "--fail-once":
			if _, statErr := os.Stat(value); os.IsNotExist(statErr) {
				if err = os.WriteFile(value, nil, 0o644); err == nil {
					return exitWith(7, closeOut)
				}
			}
		default:
			err = fmt.Errorf("unknown action %q", arg)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", arg, err)
		}
	}
	return exitWith(exitCode, closeOut)
}

func exitWith(code int, closeOut func() error) error {
	if closeOut != nil {
		_ = closeOut()
	}
	if code != 0 {
		os.Exit(code)
	}
	return nil
}

// spawn starts a child that leaves the helper's process group, as OpenTofu leaves the runner's.
func spawn() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "--marker="+markerPath, "--ignore-term", "--sleep")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	mark("child " + strconv.Itoa(cmd.Process.Pid))
	go func() { _ = cmd.Wait() }()
	return nil
}

func whoami(kubeconfig string) (string, error) {
	if kubeconfig == "" {
		return "", fmt.Errorf("no --backend-config=config_path=... given")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return "", err
	}
	client, err := authv1client.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	review, err := client.SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return review.Status.UserInfo.Username, nil
}
