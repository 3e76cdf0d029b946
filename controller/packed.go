package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
)

// PackedObject is how the manager's cache holds an object of the kinds that run Jobs
// (TerraformCluster, TerraformMachine, TerraformMachinePool): its name, namespace,
// resourceVersion and labels, which the cache's keys, namespace index and label selectors read,
// and the whole object as JSON, compressed against a dictionary of its kind.
//
// Decoded, such an object is about 2 KB in some thirty allocations: its struct, every string
// its JSON held, its conditions, maps and slices. Packed, it is one small struct and a hundred
// or two bytes, and the heap no longer keeps spans alive for the strings of every cached object.
// The price is CPU: each read through the cache decodes the object, where it would copy it.
//
// Reads through the cache never see a PackedObject: its deep copy, which the cache's reads
// make of every object they return, is the object it packs, and the informer hands handlers
// and indexers the object decoded. Nothing writes a cached object back.
type PackedObject struct {
	unkeptMetadata
	keptMetadata
	packed     []byte
	dictionary *packDictionary
}

var _ client.Object = &PackedObject{}

// GetObjectKind implements runtime.Object.
func (p *PackedObject) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object: it decodes the object p packs. Should that fail,
// which takes a bug, it returns a copy of p itself, which a read through the cache refuses
// with an error that names both types.
func (p *PackedObject) DeepCopyObject() runtime.Object {
	obj, err := p.Unpack()
	if err != nil {
		utilruntime.HandleError(err)
		out := *p
		out.pairs = clone(p.pairs)
		return &out
	}
	return obj
}

// Unpack decodes the object p packs into a new object of its kind.
func (p *PackedObject) Unpack() (client.Object, error) {
	return p.dictionary.unpack(p.packed)
}

// Packed returns how many bytes the compressed object takes.
func (p *PackedObject) Packed() int { return len(p.packed) }

// packDictionary is what packed objects refer back to (S2's block format with a dictionary):
// the JSON of one object of their kind. Objects of a kind share most of their JSON (the field
// names, the condition types, reasons and most of their messages), so each packs into the few
// bytes that are its own. A dictionary never changes, and every packed object holds the one it
// was packed against; one that no cached object holds any more is collected.
type packDictionary struct {
	kind   reflect.Type // the struct type of the kind's objects
	decode *s2.Dict     // without the encoder's tables; nil: packed without a dictionary
}

// objectPacker packs the objects of one kind against its current dictionary, and renews the
// dictionary when the objects have moved away from it: the first object packed is often a new
// one, with no status yet, unlike the objects the controller has converged.
type objectPacker struct {
	kind reflect.Type

	mu      sync.Mutex
	current *packDictionary
	encode  *s2.Dict // current's JSON, with the encoder's tables
	uses    int      // objects packed against current
}

// renewAfter is how many objects are packed against a dictionary before an object that packs
// poorly makes its JSON the next one: a run of unlike objects renews it once per renewAfter, not
// once per object.
const renewAfter = 100

// packsPoorly is whether an object packed into packed bytes of its json is unlike its dictionary:
// over a quarter of its JSON.
func packsPoorly(packed, json int) bool { return packed*4 > json }

func newObjectPacker(example client.Object) *objectPacker {
	return &objectPacker{kind: reflect.TypeOf(example).Elem()}
}

// pack returns obj packed. It keeps obj's strings for its metadata, so obj must not change after.
func (k *objectPacker) pack(obj client.Object) (*PackedObject, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("packing %s %s/%s: %w", k.kind.Name(), obj.GetNamespace(), obj.GetName(), err)
	}
	buf := buffer(s2.MaxEncodedLen(len(raw)))
	defer release(buf)
	k.mu.Lock()
	if k.current == nil {
		k.renew(raw)
	}
	encoded := k.encodeLocked(buf, raw)
	if packsPoorly(len(encoded), len(raw)) && k.uses >= renewAfter {
		k.renew(raw)
		encoded = k.encodeLocked(buf, raw)
	}
	k.uses++
	dictionary := k.current
	k.mu.Unlock()
	p := &PackedObject{
		keptMetadata: keptMetadata{namedMetadata: namedMetadata{name: obj.GetName(), namespace: intern(obj.GetNamespace()), resourceVersion: obj.GetResourceVersion()}},
		packed:       slices.Clone(encoded),
		dictionary:   dictionary,
	}
	p.setPairs(obj.GetLabels(), nil)
	return p, nil
}

// renew makes raw, an object's JSON, the dictionary of the objects packed next.
func (k *objectPacker) renew(raw []byte) {
	// S2 uses the last MaxDictSize bytes; room for the 16 bytes it appends, so that both views
	// share one copy.
	raw = raw[max(0, len(raw)-s2.MaxDictSize):]
	dict := append(make([]byte, 0, len(raw)+16), raw...)
	k.encode = s2.MakeDict(dict, nil) // nil for JSON shorter than a dictionary can be
	k.current, k.uses = &packDictionary{kind: k.kind, decode: s2.MakeDict(dict, nil)}, 0
}

// encodeLocked packs raw against the current dictionary into buf.
func (k *objectPacker) encodeLocked(buf, raw []byte) []byte {
	if k.encode == nil {
		return s2.Encode(buf, raw)
	}
	return k.encode.Encode(buf, raw)
}

// unpack decodes packed into a new object of the kind.
func (d *packDictionary) unpack(packed []byte) (client.Object, error) {
	size, err := s2.DecodedLen(packed)
	if err != nil {
		return nil, fmt.Errorf("unpacking a cached %s: %w", d.kind.Name(), err)
	}
	buf := buffer(size)
	defer release(buf)
	var raw []byte
	if d.decode != nil {
		raw, err = d.decode.Decode(buf, packed)
	} else {
		raw, err = s2.Decode(buf, packed)
	}
	if err != nil {
		return nil, fmt.Errorf("unpacking a cached %s: %w", d.kind.Name(), err)
	}
	obj := reflect.New(d.kind).Interface().(client.Object)
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("unpacking a cached %s: %w", d.kind.Name(), err)
	}
	return obj, nil
}

// buffers hold the JSON of objects being packed and unpacked.
var buffers sync.Pool // *[]byte

// maxPooledBuffer is the largest buffer put back in the pool: most objects are a few KB, and
// one large object should not keep a large buffer.
const maxPooledBuffer = 64 << 10

// buffer returns an empty buffer from the pool with room for size bytes.
func buffer(size int) []byte {
	if buf, _ := buffers.Get().(*[]byte); buf != nil && cap(*buf) >= size {
		return (*buf)[:0]
	}
	return make([]byte, 0, max(size, 4<<10))
}

// release puts buf back in the pool.
func release(buf []byte) {
	if cap(buf) <= maxPooledBuffer {
		buffers.Put(&buf)
	}
}

// unpacked is obj with a PackedObject decoded; anything else is itself.
func unpacked(obj any) (any, error) {
	switch o := obj.(type) {
	case *PackedObject:
		return o.Unpack()
	case toolscache.DeletedFinalStateUnknown:
		inner, err := unpacked(o.Obj)
		return toolscache.DeletedFinalStateUnknown{Key: o.Key, Obj: inner}, err
	}
	return obj, nil
}

// packs reports whether the manager's cache holds objects like example packed: the typed
// objects of the kinds that run Jobs.
func packs(example runtime.Object) bool {
	_, ok := example.(infrav1.Workspace)
	return ok
}

// NewPackingInformer is the manager cache's informer constructor (cache.Options.NewInformer):
// the informers of the kinds packs names hold PackedObjects; every other kind's is base's.
func NewPackingInformer(base func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer) func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer {
	if base == nil {
		base = toolscache.NewSharedIndexInformer
	}
	return func(lw toolscache.ListerWatcher, example runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		informer := base(lw, example, resync, indexers)
		if !packs(example) {
			return informer
		}
		p := &packingInformer{SharedIndexInformer: informer, packer: newObjectPacker(example.(client.Object))}
		// The cache sets its transform next; until then, objects are packed all the same.
		_ = p.SetTransform(nil)
		return p
	}
}

// packingInformer is an informer whose store holds PackedObjects, and whose handlers and
// indexers are given the objects decoded.
type packingInformer struct {
	toolscache.SharedIndexInformer
	packer *objectPacker
}

// SetTransform has the informer apply transform to each object, then pack it.
func (i *packingInformer) SetTransform(transform toolscache.TransformFunc) error {
	return i.SharedIndexInformer.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*PackedObject); ok {
			// Packed already: with a watch list, the reflector's transform runs before the
			// queue's.
			return p, nil
		}
		if transform != nil {
			var err error
			if obj, err = transform(obj); err != nil {
				return nil, err
			}
		}
		if o, ok := obj.(client.Object); ok && reflect.TypeOf(o).Elem() == i.packer.kind {
			return i.packer.pack(o)
		}
		return obj, nil // a tombstone, or an object of another kind
	})
}

// AddEventHandler implements toolscache.SharedInformer, decoding each object for handler.
func (i *packingInformer) AddEventHandler(handler toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandler(unpackingHandler{handler})
}

// AddEventHandlerWithResyncPeriod implements toolscache.SharedInformer, decoding each object
// for handler.
func (i *packingInformer) AddEventHandlerWithResyncPeriod(handler toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(unpackingHandler{handler}, resync)
}

// AddEventHandlerWithOptions implements toolscache.SharedInformer, decoding each object for
// handler.
func (i *packingInformer) AddEventHandlerWithOptions(handler toolscache.ResourceEventHandler, options toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithOptions(unpackingHandler{handler}, options)
}

// AddIndexers implements toolscache.SharedIndexInformer, decoding each object for the index
// functions. An object that does not decode, which takes a bug, is reported and left out of the
// index: the store panics on an index function's error.
func (i *packingInformer) AddIndexers(indexers toolscache.Indexers) error {
	wrapped := make(toolscache.Indexers, len(indexers))
	for name, index := range indexers {
		wrapped[name] = func(obj any) ([]string, error) {
			o, ok := unpackedOrReported(obj)
			if !ok {
				return nil, nil
			}
			return index(o)
		}
	}
	return i.SharedIndexInformer.AddIndexers(wrapped)
}

// unpackingHandler gives its handler the objects decoded. An object that does not decode, which
// takes a bug, is reported and not handed on.
type unpackingHandler struct {
	handler toolscache.ResourceEventHandler
}

// OnAdd implements toolscache.ResourceEventHandler.
func (h unpackingHandler) OnAdd(obj any, isInInitialList bool) {
	if o, ok := unpackedOrReported(obj); ok {
		h.handler.OnAdd(o, isInInitialList)
	}
}

// OnUpdate implements toolscache.ResourceEventHandler.
func (h unpackingHandler) OnUpdate(oldObj, newObj any) {
	o, ok := unpackedOrReported(oldObj)
	n, ok2 := unpackedOrReported(newObj)
	if ok && ok2 {
		h.handler.OnUpdate(o, n)
	}
}

// OnDelete implements toolscache.ResourceEventHandler.
func (h unpackingHandler) OnDelete(obj any) {
	if o, ok := unpackedOrReported(obj); ok {
		h.handler.OnDelete(o)
	}
}

// unpackedOrReported is obj decoded, or false when it does not decode, which is reported.
func unpackedOrReported(obj any) (any, bool) {
	o, err := unpacked(obj)
	if err != nil {
		utilruntime.HandleError(errors.Join(errors.New("a cached object does not decode"), err))
		return nil, false
	}
	return o, true
}
